"""The runner plug-in interface (parent side) and the runner registry.

A runner is the part of ``aaco run`` that knows one framework. It has two halves:

* this side, in the ``aaco`` process: :meth:`Runner.validate` rejects options that do not
  apply, :meth:`Runner.plan` resolves the model and inputs before any bundle exists,
  :meth:`Runner.before_worker` writes side products (the graph), and :meth:`Runner.finish`
  turns what the worker left into the bundle's runner-specific files;
* a :class:`~aaco.runners.harness.Workload` (named by :attr:`Runner.workload`), run in the
  worker process by the one harness that owns the timing loop.

Everything else (the bundle, the environment, the worker's launch and telemetry, the
iterations' statistics, the analyses, the reports) is the pipeline's
(:mod:`aaco.pipeline`). Adding a runner is one module and one :data:`RUNNERS` entry (or an
``aaco.runners`` entry point); docs/architecture.md shows a complete one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from aaco.plugins import Registry
from aaco.runners.launch import LaunchOutcome
from aaco.session.bundle import BundleWriter

__all__ = ["RUNNERS", "RunOptions", "RunPlan", "RunStage", "Runner", "runner_names"]

DEFAULT_PROFILE_ITERATIONS = 10
DEFAULT_SAMPLE_HZ = 10.0
DEFAULT_TIMEOUT_S = 3600.0


@dataclass
class RunOptions:
    """The options of ``aaco run``; None means "take the registry's value, else the default".

    One option bag for every runner: each runner's :meth:`~aaco.runners.base.Runner.validate`
    rejects the options that do not apply to it (``--device`` on ONNX Runtime, ``--shape``
    on PyTorch), so the pipeline itself never asks which framework it runs.
    """

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
    # the tracer for --profile kernels (a name in aaco.tracers.base.TRACERS); None: the
    # runner's choice (rocprofv3 for ONNX Runtime on ROCm/MIGraphX)
    tracer: str | None = None
    # telemetry collectors attached to the worker (names in aaco.collectors.base.COLLECTORS);
    # None: the default set (system) when telemetry is on
    collectors: tuple[str, ...] | None = None
    # --isolate: pin the worker to CPUs (``cpus``, else chosen by aaco.runners.capsule) and
    # set its thread counts to match; ``cpus`` given implies it
    isolate: bool = False
    cpus: tuple[int, ...] | None = None
    # the noise sentinel (aaco.runners.sentinel); None: on with --isolate, else off
    sentinel: bool | None = None
    # ``aaco rerun``: the session_id of the run this one repeats (session.json rerun_of)
    rerun_of: str | None = None


@dataclass
class RunPlan:
    """What a runner resolved before any bundle exists; the pipeline records it in
    ``session.json`` (``model``, ``backend``, ``run.inputs``, ``run.batch``, ...)."""

    model: dict[str, Any]
    backend: dict[str, Any]
    #: the runner's part of ``runtime/worker_spec.json`` (the harness's loop settings,
    #: ``bundle_dir`` and ``workload`` are added by the pipeline)
    spec: dict[str, Any]
    warmup: int
    iterations: int | None
    inputs: list[dict[str, Any]] = field(default_factory=list)
    batch: int | None = None
    #: extra keys of ``session.json``'s ``run`` section (torch: device, compile, model_spec)
    run: dict[str, Any] = field(default_factory=dict)
    #: execution providers this runtime offers, recorded in env.json
    providers: list[str] = field(default_factory=list)
    #: the runner's own state between plan and finish (the ONNX graph, the resolved model)
    state: Any = None


class RunStage:
    """The bundle being written, as a runner sees it: files, tables, and the few keys of
    ``session.json`` a runner may set. Side products go through :meth:`attempt`, so a failure
    is recorded in ``failures`` and the run is kept."""

    def __init__(self, writer: BundleWriter, meta: dict[str, Any]) -> None:
        self._writer = writer
        self._meta = meta

    @property
    def path(self) -> Path:
        return self._writer.path

    @property
    def failures(self) -> list[dict[str, str]]:
        failures: list[dict[str, str]] = self._meta["failures"]
        return failures

    def attempt(self, stage: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``; on an exception record ``{stage, error}`` and return None."""
        try:
            return fn(*args)
        except Exception as exc:  # a side product failed: record it, keep the run
            self.failures.append({"stage": stage, "error": f"{type(exc).__name__}: {exc}"[:400]})
            return None

    def write_json(self, rel: str, data: Any) -> None:
        self._writer.write_json(rel, data)

    def write_table(self, name: str, table: pa.Table) -> None:
        self._writer.write_table(name, table)

    def update(self, section: str, **values: Any) -> None:
        """Set keys of one ``session.json`` section (``run``, ``backend``)."""
        if section not in ("run", "backend"):
            raise ValueError(f"a runner may not set session.json section {section!r}")
        self._meta[section].update(values)

    def record(self, key: str, value: Any) -> None:
        """Set one top-level ``session.json`` key a runner owns (``kernel_capture``)."""
        self._meta[key] = value


class Runner(ABC):
    """One framework's side of ``aaco run``; subclasses set the class attributes and
    implement :meth:`plan` (and usually :meth:`finish`)."""

    #: the ``--framework`` value
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: ``module:Class`` of the :class:`~aaco.runners.harness.Workload` the worker runs
    workload: ClassVar[str] = ""

    def validate(self, opts: RunOptions) -> None:  # noqa: B027 - optional hook
        """Reject options that do not apply to this runner (a UsageError), before anything
        is built or started."""

    def tracer(self, opts: RunOptions) -> tuple[str, str] | None:
        """For ``--profile kernels`` when the runner's own profiler records no kernels: the
        tracer plug-in to wrap a capture pass in (``opts.tracer`` or the runner's choice) and
        what it must be able to record (an execution provider). Cheap: called before
        :meth:`plan`. None (the default): the runner takes no tracer."""
        return None

    @abstractmethod
    def plan(self, opts: RunOptions) -> RunPlan:
        """Resolve the model, inputs and settings; raise UsageError/InputError when the run
        cannot start. No bundle exists yet."""

    def before_worker(self, plan: RunPlan, stage: RunStage) -> None:  # noqa: B027
        """Write side products the worker does not need to exist (the model's graph)."""

    def check_outcome(self, plan: RunPlan, outcome: LaunchOutcome) -> None:  # noqa: B027
        """Raise a UsageError/InputError when the worker found the user's model or options at
        fault while loading; the pipeline then discards the bundle."""

    def batch(self, plan: RunPlan, outcome: LaunchOutcome) -> int | None:
        """Items per iteration, as the worker saw them (default: the plan's)."""
        return plan.batch

    def finish(  # noqa: B027 - optional hook
        self, plan: RunPlan, outcome: LaunchOutcome, stage: RunStage, summary: dict[str, Any]
    ) -> None:
        """Turn the worker's files into the bundle's runner-specific tables and files; set
        ``summary["profile"]`` when the profiled pass produced something."""


RUNNERS: Registry[Runner] = Registry(
    "runner",
    Runner,
    {
        "onnxruntime": "aaco.runners.ort:OrtRunner",
        "torch": "aaco.runners.torch:TorchRunner",
    },
    option="--framework",
)


def runner_names() -> list[str]:
    """Every ``--framework`` value: the built-ins, then third-party runners."""
    return RUNNERS.names()
