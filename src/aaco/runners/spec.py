"""What a worker is asked to run, and what it reports back: plain JSON both ways.

Two kinds of spec share ``runtime/worker_spec.json``: :class:`RunSpec` (ONNX Runtime, read by
:mod:`aaco.runners.ort` and by the rocprofv3 capture worker :mod:`aaco.runners.rocprof`) and
:class:`TorchRunSpec` (PyTorch, read by :mod:`aaco.runners.torch`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from aaco.config import BackendEntry
from aaco.runners.inputs import InputSpec
from aaco.session.paths import (
    CAPTURE_LOG_FILE,
    CAPTURE_PROGRESS_FILE,
    CAPTURE_RESULT_FILE,
    LOG_FILE,
    OPTIMIZED_MODEL,
    OPTIMIZED_WEIGHTS,
    PROFILE_DIR,
    PROGRESS_FILE,
    RESULT_FILE,
    SPEC_FILE,
    TORCH_TRACE,
)

# the worker's files are bundle paths (aaco.session.paths), named here for the worker code
__all__ = [
    "CAPTURE_FILES",
    "COMMON_RESULT_FIELDS",
    "LOG_FILE",
    "MEASURE_FILES",
    "OPTIMIZED_MODEL",
    "OPTIMIZED_WEIGHTS",
    "PROFILE_DIR",
    "PROGRESS_FILE",
    "RESULT_FILE",
    "SPEC_FILE",
    "TORCH_TRACE",
    "RunSpec",
    "TorchRunSpec",
    "WorkerFiles",
    "WorkerResult",
]


@dataclass(frozen=True)
class WorkerFiles:
    """Where one worker reports: its result, its stage-by-stage progress and its log.

    The measuring worker and a later capture worker (rocprofv3) run in the same bundle, so
    each gets its own files and the second cannot overwrite the first's account.
    """

    result: str = RESULT_FILE
    progress: str = PROGRESS_FILE
    log: str = LOG_FILE


MEASURE_FILES = WorkerFiles()
CAPTURE_FILES = WorkerFiles(
    result=CAPTURE_RESULT_FILE, progress=CAPTURE_PROGRESS_FILE, log=CAPTURE_LOG_FILE
)


@dataclass(frozen=True)
class RunSpec:
    """Everything the worker needs; the parent has already validated it."""

    model_path: str
    inputs: tuple[InputSpec, ...]
    backend: BackendEntry
    warmup: int
    iterations: int | None
    duration_s: float | None
    threads: int | None
    seed: int
    profile: bool
    profile_warmup: int
    profile_iterations: int
    bundle_dir: str
    preprocess: str | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunSpec:
        b = d["backend"]
        backend = BackendEntry(
            name=b["name"],
            provider=b["provider"],
            intra_op_threads=b["intra_op_threads"],
            inter_op_threads=b["inter_op_threads"],
            graph_optimization_level=b["graph_optimization_level"],
            execution_mode=b["execution_mode"],
            fallback_providers=tuple(b["fallback_providers"]),
            provider_options=dict(b["provider_options"]),
            origin=b.get("origin", "builtin"),
            enable_mem_pattern=b.get("enable_mem_pattern"),
            enable_cpu_mem_arena=b.get("enable_cpu_mem_arena"),
            io_binding=bool(b.get("io_binding", False)),
        )
        return cls(
            model_path=d["model_path"],
            inputs=tuple(InputSpec.from_json(i) for i in d["inputs"]),
            backend=backend,
            warmup=int(d["warmup"]),
            iterations=d["iterations"],
            duration_s=d["duration_s"],
            threads=d["threads"],
            seed=int(d["seed"]),
            profile=bool(d["profile"]),
            profile_warmup=int(d["profile_warmup"]),
            profile_iterations=int(d["profile_iterations"]),
            bundle_dir=d["bundle_dir"],
            preprocess=d.get("preprocess"),
        )


@dataclass(frozen=True)
class TorchRunSpec:
    """What the PyTorch worker runs; the parent has checked what it can without torch.

    ``model`` is ``module:function``, ``file.py:function`` or a ``.pt2`` path; ``model_kind``
    says which (``function`` or ``export``). ``sys_path`` is prepended to the worker's
    ``sys.path`` so a module next to the user's working directory imports as it would there.
    """

    model: str
    model_kind: str  # function | export
    device: str
    compile: bool
    batch: int | None
    warmup: int
    iterations: int | None
    duration_s: float | None
    threads: int | None
    seed: int
    profile: bool
    profile_warmup: int
    profile_iterations: int
    bundle_dir: str
    sys_path: tuple[str, ...] = ()
    framework: str = "torch"

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["sys_path"] = list(self.sys_path)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TorchRunSpec:
        known = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in d.items() if k in known}
        kw["sys_path"] = tuple(kw.get("sys_path", ()))
        return cls(**kw)


#: WorkerResult fields every worker writes; anything else in worker_result.json is the
#: runner's own (``WorkerResult.extra``: ONNX Runtime's providers and profile file, PyTorch's
#: framework info and trace file, ...), written flat beside them.
COMMON_RESULT_FIELDS = (
    "status",
    "stage",
    "error",
    "error_type",
    "phases",
    "measured_iterations",
    "warmup_iterations",
    "profile_runs",
    "profile_wall_ns",
    "load_time_ns",
    "failures",
    "peak_rss_bytes",
    "affinity",
    "sentinel",
)


@dataclass
class WorkerResult:
    """The worker's own account of the run; the parent adds what it saw from outside.

    The fields are what the harness (:mod:`aaco.runners.harness`) records for every runner;
    ``extra`` holds what one runner adds. On disk both are one flat JSON object.
    """

    status: str = "failed"  # completed | failed
    stage: str = "start"  # the stage reached: start, load, inputs, warmup, measure, profile, done
    error: str | None = None
    error_type: str | None = None
    phases: dict[str, list[int]] = field(default_factory=dict)
    measured_iterations: int = 0
    warmup_iterations: int = 0
    profile_runs: int = 0
    profile_wall_ns: list[int] = field(default_factory=list)
    load_time_ns: int | None = None
    failures: list[dict[str, str]] = field(default_factory=list)
    # The worker's own peak RSS in bytes, read by the worker as it ends (VmHWM, see
    # aaco.runners.rss); None where the system does not say, or from an older worker.
    peak_rss_bytes: int | None = None
    # The CPUs the worker and its threads were allowed to run on, read by the worker itself
    # ({"process": [...], "threads": [...], "thread_count": n}); None off Linux or from an
    # older worker.
    affinity: dict[str, Any] | None = None
    # The noise sentinel's record (aaco.runners.sentinel.report) when the spec asked for it.
    sentinel: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        """A runner's own field (``extra``), or ``default``."""
        return self.extra.get(key, default)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        extra = d.pop("extra")
        return {**{k: v for k, v in extra.items() if k not in d}, **d}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WorkerResult:
        known = set(COMMON_RESULT_FIELDS)
        return cls(
            **{k: v for k, v in d.items() if k in known},
            extra={k: v for k, v in d.items() if k not in known and k != "extra"},
        )
