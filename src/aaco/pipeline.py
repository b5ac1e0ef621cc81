"""The one pipeline every command runs through: plan → launch (runner, collectors, tracer)
→ import → analyses → publish → render.

``aaco run`` is :func:`run_model`: the runner plug-in named by ``--framework``
(:data:`aaco.runners.base.RUNNERS`) plans the run before any bundle exists; the bundle is
created; the environment is captured; the worker harness (:mod:`aaco.runners.harness`)
runs the runner's workload with the collectors (:data:`aaco.collectors.base.COLLECTORS`)
watching; the runner turns the worker's files into tables; a tracer
(:data:`aaco.tracers.base.TRACERS`) re-runs the profiled pass for ``--profile kernels``
and its trace is imported; the analyses (:func:`default_analyses`) run; the bundle is
published and its report copies rendered. ``aaco import`` and ``aaco analyze`` enter the
same stages at import and at analyses. Nothing here asks which framework it runs.

>>> from aaco.pipeline import RunOptions, run_model          # doctest: +SKIP
>>> session = run_model(RunOptions(model="mlp", iterations=50))   # doctest: +SKIP
>>> session.summary["latency_ms"]["p50"]                     # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from aaco import __version__
from aaco.analysis.stats import summarize_iterations
from aaco.analysis.telemetry import summarize_system
from aaco.collectors.base import COLLECTORS, DEFAULT_COLLECTORS, Collector
from aaco.collectors.environment import capture_environment
from aaco.collectors.machine_state import check_machine
from aaco.errors import UsageError
from aaco.ingest import analyze, analyze_session, import_into, import_new, ingest_traces
from aaco.report.publish import write_reports
from aaco.runners.base import (
    RUNNERS,
    Runner,
    RunOptions,
    RunPlan,
    RunStage,
)
from aaco.runners.capsule import CapsulePlan, capsule_document, plan_capsule
from aaco.runners.harness import CAPTURE_FLAG, WORKER_MODULE, worker_argv
from aaco.runners.launch import LaunchOutcome, launch_worker
from aaco.runners.rss import own_peak_rss_bytes
from aaco.runners.spec import CAPTURE_FILES, SPEC_FILE
from aaco.session.bundle import (
    FORMAT_VERSION,
    STATUS_COMPLETED,
    STATUS_FAILED,
    STATUS_RUNNING,
    BundleWriter,
    Session,
    read_json,
    table_handoff,
    utc_now_iso,
)
from aaco.session.paths import (
    CAPSULE_FILE,
    ENV_FILE,
    INFERENCE_SUMMARY_FILE,
    MODEL_META_FILE,
    SESSION_FILE,
)
from aaco.session.records import save_session
from aaco.session.salvage import salvage
from aaco.session.schema import (
    GPU_TELEMETRY,
    INFERENCE_ITERS,
    SCHED_SYSTEM,
    SCHED_THREADS,
    SYSTEM_EVENTS,
)
from aaco.tracers.base import TRACERS, Tracer

__all__ = [
    "PROFILE_MODES",
    "KernelCapture",
    "RunOptions",
    "analyze",
    "analyze_session",
    "frameworks",
    "import_into",
    "import_new",
    "run_model",
]

DEFAULT_PROFILE_WARMUP = 2
PROFILE_MODES = ("ops", "kernels")


def frameworks() -> list[str]:
    """Every ``--framework`` value (the registered runners)."""
    return RUNNERS.names()


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
    if opts.profile_mode not in PROFILE_MODES:
        raise UsageError(
            f"unknown --profile {opts.profile_mode!r}; valid: {', '.join(PROFILE_MODES)}"
        )
    if opts.profile_mode == "kernels" and not opts.profile:
        raise UsageError("--profile kernels and --no-profile contradict each other")
    if opts.batch is not None and opts.batch < 1:
        raise UsageError(f"--batch must be >= 1, got {opts.batch}")
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
    runner = RUNNERS.get(opts.framework)()
    _validate(opts)
    runner.validate(opts)
    # --isolate: the CPUs and the thread count are resolved before the runner plans
    capsule = plan_capsule(opts)
    opts = capsule.options
    tracer = _tracer(runner, opts)
    collectors = _collectors(opts)
    plan = runner.plan(opts)
    writer = BundleWriter(opts.output)
    try:
        with table_handoff():  # the analyses and reports get the tables written here
            return _run_into(writer, opts, runner, plan, tracer, collectors, capsule)
    except _UserFault as fault:
        # The user's model or options were at fault (found by the worker): no bundle.
        writer.discard()
        raise fault.error from None
    except BaseException:
        # Only AACO's own bug or Ctrl-C gets here; keep the bundle as a record, flagged failed.
        salvage(writer, sys.exc_info()[1])
        raise


class _UserFault(Exception):
    """The worker found the user's model or options at fault (the runner's check_outcome):
    the bundle is discarded and ``error`` raised, as before any bundle existed."""

    def __init__(self, error: UsageError) -> None:
        super().__init__(str(error))
        self.error = error


def _tracer(runner: Runner, opts: RunOptions) -> Tracer | None:
    """The tracer the runner asks for, checked before anything is built or started (a
    UsageError when it cannot record here)."""
    wanted = runner.tracer(opts)
    if wanted is None:
        if opts.tracer is not None:
            raise UsageError(f"--framework {runner.name} takes no tracer (got {opts.tracer!r})")
        return None
    name, target = wanted
    tracer = TRACERS.get(name)()
    tracer.prepare(target)
    return tracer


def _collectors(opts: RunOptions) -> dict[str, Callable[[int], Collector]]:
    """The collectors to attach, by registry name: factories given the worker's pid."""
    if not opts.telemetry:
        return {}
    names = opts.collectors if opts.collectors is not None else DEFAULT_COLLECTORS
    return {
        name: functools.partial(_start_collector, COLLECTORS.get(name), opts.sample_hz)
        for name in names
    }


def _start_collector(cls: type[Collector], hz: float, pid: int) -> Collector:
    return cls.for_process(pid, hz)


def initial_meta(writer: BundleWriter, opts: RunOptions, plan: RunPlan) -> dict[str, Any]:
    """The first ``session.json``: what was asked for and what the runner resolved."""
    warmup, iterations, batch = plan.warmup, plan.iterations, plan.batch
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
        "model": plan.model,
        "backend": plan.backend,
        "run": {
            "framework": opts.framework,
            "batch": batch,
            "batch_source": None if batch is None else ("--batch" if opts.batch else "inputs"),
            "inputs": plan.inputs,
            "warmup": warmup,
            "iterations": iterations,
            "duration_s": opts.duration_s,
            "threads": opts.threads,
            "seed": opts.seed,
            "preprocess": opts.preprocess,
            "profile": opts.profile,
            "profile_mode": opts.profile_mode if opts.profile else None,
            # The profiled session is new and cold: warm it as long as the measured one was.
            "profile_warmup": max(DEFAULT_PROFILE_WARMUP, warmup) if opts.profile else 0,
            "profile_iterations": opts.profile_iterations if opts.profile else 0,
            "telemetry": opts.telemetry,
            "sample_hz": opts.sample_hz if opts.telemetry else None,
            "timeout_s": opts.timeout_s,
            **plan.run,
        },
        "clock": {
            "name": "perf_counter_ns (CLOCK_MONOTONIC)",
            "epoch_offset_ns": time.time_ns() - time.perf_counter_ns(),
        },
        "phases": {},
        "failures": [],
    }


def _worker_spec(
    writer: BundleWriter, opts: RunOptions, runner: Runner, plan: RunPlan, meta: dict[str, Any]
) -> dict[str, Any]:
    """``runtime/worker_spec.json``: the runner's part plus the harness's loop settings."""
    run = meta["run"]
    return {
        **plan.spec,
        "warmup": plan.warmup,
        "iterations": plan.iterations,
        "duration_s": opts.duration_s,
        "threads": opts.threads,
        "seed": opts.seed,
        "profile": opts.profile,
        "profile_warmup": int(run["profile_warmup"]),
        "profile_iterations": opts.profile_iterations,
        "bundle_dir": str(writer.path),
        "workload": runner.workload,
    }


def _run_into(
    writer: BundleWriter,
    opts: RunOptions,
    runner: Runner,
    plan: RunPlan,
    tracer: Tracer | None,
    collectors: Mapping[str, Callable[[int], Collector]],
    capsule: CapsulePlan | None = None,
) -> Session:
    capsule = capsule if capsule is not None else CapsulePlan(opts, opts)
    meta = initial_meta(writer, opts, plan)
    if opts.rerun_of is not None:
        meta["rerun_of"] = opts.rerun_of
    save_session(writer.path, meta)
    stage = RunStage(writer, meta)
    _write_env(writer, meta, stage, plan.providers)
    runner.before_worker(plan, stage)
    stage.attempt("capsule", _write_capsule, writer, capsule, meta)

    plan.spec = _worker_spec(writer, opts, runner, plan, meta)
    plan.spec["sentinel"] = capsule.sentinel
    plan.spec["cpus"] = list(capsule.cpus) if capsule.cpus else None
    writer.write_json(SPEC_FILE, plan.spec)
    if capsule.isolated or capsule.sentinel:
        # the machine's state as this run met it, just before the worker starts
        checks = check_machine(cpus=capsule.cpus, sample=capsule.sample)
        meta["capsule"] = {**capsule.record(), "machine_state": [c.to_json() for c in checks]}
    outcome = launch_worker(
        writer.path,
        WORKER_MODULE,
        opts.timeout_s,
        collectors,
        cpus=capsule.cpus,
        env=capsule.worker_env(),
    )
    try:
        runner.check_outcome(plan, outcome)
    except UsageError as exc:
        raise _UserFault(exc) from None
    batch = runner.batch(plan, outcome)
    summary = _finish_common(writer, meta, outcome, batch)
    runner.finish(plan, outcome, stage, summary)
    _finish_capsule(meta, outcome, summary)
    _finish_summary(writer, meta, outcome, summary, batch)
    if tracer is not None and outcome.status == STATUS_COMPLETED:
        _capture(writer, stage, tracer, opts.timeout_s)
    _analyze(writer, meta, stage, opts.auto_calibrate)
    writer.publish()
    return write_reports(writer.final_path)


def _write_env(
    writer: BundleWriter, meta: dict[str, Any], stage: RunStage, providers: list[str]
) -> None:
    """env.json and the session's fingerprint (a failure is recorded, not raised)."""
    env = stage.attempt("environment", capture_environment, meta["command_line"], providers)
    if env is not None:
        writer.write_json(ENV_FILE, env)
        meta["fingerprint"] = env.get("fingerprint")


def _write_capsule(writer: BundleWriter, capsule: CapsulePlan, meta: dict[str, Any]) -> None:
    """``runtime/capsule.json``: what ``aaco rerun`` rebuilds the run from."""
    env_file = writer.path / ENV_FILE
    env = read_json(env_file) if env_file.is_file() else None
    writer.write_json(CAPSULE_FILE, capsule_document(writer.path, capsule, meta, env))


def _finish_capsule(meta: dict[str, Any], outcome: LaunchOutcome, summary: dict[str, Any]) -> None:
    """What the worker saw of its capsule: the CPUs it and its threads could run on, and the
    noise sentinel, whose change of speed becomes one of the summary's warnings."""
    record = meta.get("capsule")
    result = outcome.result
    if record is None or result is None:
        return
    record["worker_affinity"] = result.affinity
    record["sentinel"] = result.sentinel
    sentinel = result.sentinel or {}
    if sentinel.get("speed_changed"):
        drifts = [
            f"{sentinel[k]:+.1f}% {where} (threshold {sentinel[t]:.1f}%)"
            for k, t, where in (
                ("drift_between_pct", "threshold_between_pct", "after the warmup"),
                ("drift_pct", "threshold_pct", "after the measured phase"),
            )
            if sentinel.get(k) is not None and sentinel.get(t) is not None
        ]
        summary.setdefault("warnings", []).append(
            "CPU speed changed during the run: the sentinel loop's time moved "
            + ", ".join(drifts)
            + " against before the warmup; frequency scaling, throttling or other work "
            "(see aaco doctor)"
        )


def _finish_common(
    writer: BundleWriter, meta: dict[str, Any], outcome: LaunchOutcome, batch: int | None
) -> dict[str, Any]:
    """What every worker's end records: status, phases, telemetry, latency statistics."""
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
    for name, table in outcome.telemetry.items():
        cls = COLLECTORS.get(name)
        # a collector that gathered nothing (no GPU, no /proc) writes no table: its info
        # in session.json says why
        if table.num_rows:
            writer.write_table(cls.table_name, table)
        info = outcome.telemetry_info.get(name, {})
        if cls.meta_key is not None:
            meta[cls.meta_key] = info
        else:
            meta.setdefault("collectors", {})[name] = info
    for table_name, table in outcome.extra_telemetry.items():
        if table.num_rows:
            writer.write_table(table_name, table)

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
    iters_file = writer.path / INFERENCE_ITERS.path
    if iters_file.is_file():
        summary.update(summarize_iterations(pq.read_table(iters_file), batch))
    else:
        summary.update(
            {"latency_ms": None, "throughput": None, "warmup": None, "noise": None, "warnings": []}
        )
    return summary


def _finish_summary(
    writer: BundleWriter,
    meta: dict[str, Any],
    outcome: LaunchOutcome,
    summary: dict[str, Any],
    batch: int | None = None,
) -> None:
    if "profile" not in summary:
        summary["profile"] = None
    system = _table_of(outcome, SYSTEM_EVENTS.name)
    if system is not None and system.num_rows:
        window = meta["phases"].get("measured")
        summary["telemetry"] = summarize_system(system, tuple(window) if window else None)
    else:
        summary["telemetry"] = None
    summary.update(machine_summaries(outcome, meta, batch))
    writer.write_json(INFERENCE_SUMMARY_FILE, summary)


def machine_summaries(
    outcome: LaunchOutcome, meta: Mapping[str, Any], batch: int | None = None
) -> dict[str, Any]:
    """The GPU and scheduler collectors' summaries over the measured window (``gpu``,
    ``sched``: None when the collector did not run or gathered nothing). An inference is one
    sample: the GPU's energy per inference divides by measured iterations x ``batch``, and
    is unknown when the batch is (one sample per iteration is not assumed)."""
    from aaco.analysis.gpu import summarize_gpu
    from aaco.analysis.sched import summarize_sched

    window = meta["phases"].get("measured")
    span = (int(window[0]), int(window[1])) if window else None
    result = outcome.result
    inferences = (
        result.measured_iterations * batch if result is not None and batch is not None else None
    )
    gpu = _table_of(outcome, GPU_TELEMETRY.name)
    threads = _table_of(outcome, SCHED_THREADS.name)
    return {
        "gpu": summarize_gpu(gpu, span, inferences) if gpu is not None and gpu.num_rows else None,
        "sched": (
            summarize_sched(threads, outcome.extra_telemetry.get(SCHED_SYSTEM.name), span, None)
            if threads is not None and threads.num_rows
            else None
        ),
    }


def _table_of(outcome: LaunchOutcome, table_name: str) -> pa.Table | None:
    """The table a collector wrote as ``table_name`` (``system_events``: the telemetry the
    summary describes), whichever collector it was."""
    for name, table in outcome.telemetry.items():
        if COLLECTORS.get(name).table_name == table_name:
            return table
    return None


def _graph_node_count(writer: BundleWriter) -> int | None:
    """Node count of the original graph (for KAR), from model/model_meta.json."""
    f = writer.path / MODEL_META_FILE
    if not f.is_file():
        return None
    count = read_json(f).get("node_count")
    return count if isinstance(count, int) else None


@dataclass
class KernelCapture:
    """How a tracer's capture went; ``output_dir`` holds its trace when ``status`` is
    completed. Recorded in ``session.json`` as ``kernel_capture``."""

    status: str  # completed | failed | timeout
    error: str | None
    command: list[str]
    output_dir: str
    returncode: int | None
    wall_s: float
    files: list[str] = field(default_factory=list)
    runs: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def capture_with(tracer: Tracer, bundle_dir: Path, timeout_s: float | None) -> KernelCapture:
    """Re-run the profiled workload of ``bundle_dir``'s spec in a capture worker wrapped by
    ``tracer``. Never raises for a failed capture: the status and error say what happened,
    and the measured run already in the bundle stays as it is."""
    out = bundle_dir / tracer.output_dir
    out.mkdir(parents=True, exist_ok=True)
    prefix = tracer.command(out)
    outcome = launch_worker(
        bundle_dir,
        WORKER_MODULE,
        timeout_s,
        args=[CAPTURE_FLAG],
        wrapper=prefix,
        files=CAPTURE_FILES,
    )
    files = sorted(str(p.relative_to(bundle_dir)) for p in out.rglob("*") if p.is_file())
    status, error = outcome.status, outcome.error
    if status == STATUS_COMPLETED:
        why = tracer.check_output(files)
        if why is not None:
            status, error = STATUS_FAILED, why
    return KernelCapture(
        status=status,
        error=error,
        command=[*prefix, *worker_argv(bundle_dir, capture=True)],
        output_dir=str(out),
        returncode=outcome.returncode,
        wall_s=outcome.wall_ns / 1e9,
        files=files,
        runs=outcome.result.profile_runs if outcome.result else 0,
    )


def _capture(
    writer: BundleWriter, stage: RunStage, tracer: Tracer, timeout_s: float | None
) -> None:
    """Re-run the profiled workload under ``tracer`` and import its trace; a failure is
    recorded (``kernel_capture``) and leaves the measured run as it is."""
    capture = capture_with(tracer, writer.path, timeout_s)
    record_json = capture.to_json()
    stage.record("kernel_capture", record_json)
    if capture.status != STATUS_COMPLETED:
        stage.failures.append(
            {"stage": "kernel_capture", "error": f"{capture.status}: {capture.error}"[:400]}
        )
        return
    record = stage.attempt(
        "kernel_ingest",
        _ingest,
        writer.path,
        [Path(capture.output_dir)],
        _graph_node_count(writer),
    )
    if record is not None:
        record_json["rows"] = record.get("rows")


def _ingest(bundle: Path, paths: list[Path], graph_node_count: int | None) -> dict[str, Any]:
    return ingest_traces(bundle, paths, graph_node_count=graph_node_count)


def _analyze(
    writer: BundleWriter,
    meta: dict[str, Any],
    stage: RunStage,
    auto_calibrate: bool | None = None,
) -> None:
    """The analyses (roofline, bottleneck verdict, recommendations), written before the
    bundle is published (a failure is recorded, the run is kept); then the aaco process's
    own peak RSS (``aaco_process``). The worker has exited by now, so a first-run
    calibration (``auto_calibrate``, in a process of its own) never measures beside the
    workload."""
    save_session(writer.path, meta)
    if meta.get("status") == STATUS_COMPLETED:
        analyze(writer.path, auto_calibrate)
        # the analyses record their own failures in session.json
        meta["failures"] = read_json(writer.path / SESSION_FILE).get("failures", [])
    # After the last analysis: the reports rendered from the bundle next are not counted.
    meta["aaco_process"] = {"max_rss_bytes": own_peak_rss_bytes()}
    save_session(writer.path, meta)
